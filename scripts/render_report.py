"""Render a run's report.html as a reader sees it: headless Chromium, full page, to a PNG.

    python scripts/render_report.py runs/task1 [--out report.png] [--width 1280]

Needs Debian's `chromium` package (apt-get install chromium); nothing is fetched from the network.
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="default <run>/report.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=12000, help="page height to capture (px)")
    args = parser.parse_args()
    page = (args.run / "report.html").resolve()
    if not page.is_file():
        print(f"{page}: not found; run `redkit report --run {args.run}` first", file=sys.stderr)
        return 2
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("chromium not found: apt-get install chromium", file=sys.stderr)
        return 2
    out = (args.out or args.run / "report.png").resolve()
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={args.width},{args.height}",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
