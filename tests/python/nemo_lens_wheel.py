"""The real nemo-lens package (PyPI, pinned in python/requirements-wheels.txt)
for tests that run under Debian's Python 3.11, and an environment that runs
lens's start-up hook as a pip install of lens does.

nemo-lens 0.1.0 declares Python >= 3.13; its code needs 3.12 for one line
only, a `type` alias statement in nemo/lens/strategies.py. Under an older
Python, loadable_copy() extracts the wheel into a temporary folder and writes
that one statement as a plain assignment there (the same name bound to the
same value); the installed wheel and the rest of the package are untouched.
"""

import glob
import os
import re
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WHEELS = os.path.join(ROOT, ".venv", "wheels")

_TYPE_ALIAS = re.compile(r"^type (\w+) = ", re.MULTILINE)


def wheel():
    found = sorted(glob.glob(os.path.join(WHEELS, "nemo_lens-*.whl")))
    if not found:
        raise RuntimeError(f"no nemo-lens wheel in {WHEELS}: run scripts/bootstrap")
    return found[-1]


def loadable_copy(folder):
    """Extracts nemo-lens into `folder` (its `nemo` package) and returns the
    folder to put on sys.path; under Python < 3.12, with the type alias
    statement written as an assignment."""
    with zipfile.ZipFile(wheel()) as whl:
        for name in whl.namelist():
            if name.startswith("nemo/"):
                whl.extract(name, folder)
    if sys.version_info < (3, 12):
        path = os.path.join(folder, "nemo", "lens", "strategies.py")
        with open(path) as f:
            text = f.read()
        text, n = _TYPE_ALIAS.subn(r"\1 = ", text)
        if n != 1:
            raise RuntimeError(f"{path}: expected one type alias statement, found {n}")
        with open(path, "w") as f:
            f.write(text)
    return folder


def environment_with_hook(folder, lens_python_dir):
    """A virtual environment in `folder` as a user's with lens pip-installed:
    Debian's packages (torch), the project venv's (the OpenTelemetry API and
    SDK), the build tree's lens, and lens's start-up hook (lens-otel.pth) in
    its site-packages, where the interpreter runs it. Returns its python."""
    subprocess.run([sys.executable if sys.base_prefix == sys.prefix else
                    os.path.join(sys.base_prefix, "bin", "python3"),
                    "-m", "venv", "--system-site-packages", "--without-pip", folder], check=True)
    python = os.path.join(folder, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    venv_site = sysconfig.get_paths()["purelib"]  # this interpreter's: the project venv's
    with open(os.path.join(site, "00-lens-test-paths.pth"), "w") as f:
        f.write(f"{lens_python_dir}\n{venv_site}\n")
    with open(os.path.join(lens_python_dir, "lens-otel.pth")) as src, \
            open(os.path.join(site, "lens-otel.pth"), "w") as dst:
        dst.write(src.read())
    return python
