"""Look at a ``sweep report --html`` page without opening a browser by hand: headless Chromium
renders it to a PNG screenshot (hover titles do not show in a still image; open the page in a
browser for those).

    sweep report results/serve_a_model --html
    python examples/render_report.py results/serve_a_model/report.html [--png FILE]
        [--width 1280] [--height 4000]

The screenshot goes beside the page (``report.png``) unless ``--png`` says where. Needs
``chromium``, ``chromium-browser`` or ``google-chrome`` on the PATH; without one it says so and
exits 2.
"""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def render(page: Path, png: Path, width: int, height: int) -> Path:
    """``page`` as Chromium draws it, ``width`` x ``height`` pixels, written to ``png``."""
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        raise RuntimeError("render_report: no headless Chromium found (tried "
                         f"{', '.join(BROWSERS)}); open {page} in a browser instead")
    command = [browser, "--headless", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={width},{height}", f"--screenshot={png.resolve()}",
               page.resolve().as_uri()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return png


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="an HTML file written by sweep report --html")
    parser.add_argument("--png", type=Path, help="the screenshot (default: beside the page)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=4000)
    args = parser.parse_args(argv)
    if not args.page.is_file():
        print(f"render_report: {args.page}: no such file; allowed: an HTML file written by "
              "sweep report --html", file=sys.stderr)
        return 2
    try:
        png = render(args.page, args.png or args.page.with_suffix(".png"), args.width,
                     args.height)
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"{args.page} -> {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
