"""An error's message reaches the terminal as written: ``harvester deployments`` on a sites file of the wrong shape
said "expected  tables only" (stranger check, stop 48): the console read "[sites.<name>]", the shape the message
names, as markup and dropped it. The real command in a subprocess, as a user meets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HARVESTER = str(Path(sys.executable).with_name("harvester"))


def test_an_error_naming_a_bracketed_shape_prints_it(tmp_path: Path) -> None:
    (tmp_path / "sites.toml").write_text('[[site]]\nname = "a"\nseeds = ["http://127.0.0.1:9/"]\n', encoding="utf-8")
    done = subprocess.run([HARVESTER, "deployments", "--sites", "sites.toml", "--pool", "p", "-o", "d.yaml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "expected [sites.<name>] tables only" in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "d.yaml").exists()
