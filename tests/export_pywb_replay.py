"""Replay through pywb, run by the Python of the environment pywb lives in (not the project's: pywb pins
redis==2.10.6, Prefect's pydocket needs redis>=6, so one environment cannot hold both).

    python export_pywb_replay.py ROOT WARC [WARC...] < queries.json   (answers in ROOT/answers.json)

Makes a pywb collection ``harvest`` under ROOT (``wb-manager init`` / ``add``: pywb indexes the files itself), then
asks pywb's WSGI app in this process (no server, no port) for each query ``[timestamp, url]`` in the ``id_``
(identity) mode, which answers the archived HTTP status, headers and payload as captured. Writes, per query,
``{"status": ..., "headers": [[name, value]...], "body_b64": ...}``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path


def main() -> None:
    root, warcs = Path(sys.argv[1]), [str(Path(w).resolve()) for w in sys.argv[2:]]
    root.mkdir(parents=True, exist_ok=True)
    manager = str(Path(sys.executable).with_name("wb-manager"))
    os.chdir(root)
    subprocess.run([manager, "init", "harvest"], check=True, capture_output=True)
    subprocess.run([manager, "add", "harvest", *warcs], check=True, capture_output=True)
    from pywb.apps.frontendapp import FrontEndApp  # after init: pywb reads ./config.yaml and ./collections
    from werkzeug.test import Client

    client = Client(FrontEndApp())
    answers = []
    for timestamp, url in json.load(sys.stdin):
        response = client.get(f"/harvest/{timestamp}id_/{url}")
        answers.append({
            "status": response.status_code,
            "headers": [[k, v] for k, v in response.headers.items()],
            "body_b64": base64.b64encode(response.get_data()).decode("ascii"),
        })
    (root / "answers.json").write_text(json.dumps(answers))  # pywb logs to stdout


if __name__ == "__main__":
    main()
