"""`pip install .` and `python3 -m build --wheel` from the repository, into
fresh virtual environments, offline, as a Python user installs lens.

    pip_install_test.py REPO_ROOT LENS_BIN WHEEL_BUILD_DIR

1. A virtual environment with --system-site-packages (so Debian's torch and
   pandas are seen); `pip install --no-build-isolation --no-index REPO_ROOT`
   builds the extensions and liblens with CMake (in WHEEL_BUILD_DIR, kept
   between runs) and installs them.
2. From there, with no PYTHONPATH and outside the repository: `import
   lens` comes from the environment, with its version; the example
   pp_train.py trains 2 ranks and `lens check` passes on its traces;
   lens.analysis reads them.
3. `python3 -m build --wheel --no-isolation` makes a wheel that carries
   liblens and declares its optional dependencies; installed into a second
   environment, `import lens` works.
"""

import glob
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

root, lens_bin, wheel_build = map(pathlib.Path, sys.argv[1:4])
python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(command, cwd, env=None, timeout=1200):
    clean = {k: v for k, v in (env or os.environ).items() if k != "PYTHONPATH"}
    clean["LENS_WHEEL_BUILD_DIR"] = str(wheel_build)
    r = subprocess.run(command, cwd=cwd, env=clean, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        print(f"$ {' '.join(map(str, command))}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


with tempfile.TemporaryDirectory(prefix="lens-pip-") as tmp:
    tmp = pathlib.Path(tmp)
    venv = tmp / "venv"
    r = run([python, "-m", "venv", "--system-site-packages", venv], cwd=tmp)
    check(r.returncode == 0, "a virtual environment with the system's packages")
    vpy = venv / "bin" / "python"
    r = run([vpy, "-m", "pip", "install", "--no-build-isolation", "--no-index", root], cwd=tmp)
    check(r.returncode == 0, "pip install --no-build-isolation --no-index REPO_ROOT")

    r = run([vpy, "-c", "import importlib.metadata as m, lens, lens.analysis; "
             "print(lens.__file__); print(m.version('lens-pp'))"], cwd=tmp)
    where, _, version = r.stdout.strip().partition("\n")
    check(r.returncode == 0 and where.startswith(str(venv)),
          f"import lens from the environment, no PYTHONPATH ({where})")
    cmake_version = next(l for l in (root / "CMakeLists.txt").read_text().splitlines()
                         if l.startswith("project(lens VERSION")).split()[2]
    check(version == cmake_version, f"the installed version is the project's ({version})")
    # OTEL_PYTHON_TRACER_PROVIDER=lens finds lens.otel through the installed
    # entry point (the API itself is not needed to see it).
    r = run([vpy, "-c", "import importlib.metadata as m; "
             "print([e.value for e in m.entry_points(group='opentelemetry_tracer_provider', "
             "name='lens')])"], cwd=tmp)
    check(r.returncode == 0 and r.stdout.strip() == "['lens.otel:TracerProvider']",
          f"the opentelemetry_tracer_provider entry point 'lens' ({r.stdout.strip()} {r.stderr[-300:]})")

    traces = tmp / "traces"
    r = run([vpy, root / "python" / "examples" / "pp_train.py", "--world", "2", "--steps", "3",
             "--trace-dir", traces], cwd=tmp, timeout=300)
    check(r.returncode == 0, "pp_train.py --world 2 from the environment")
    runs = glob.glob(str(traces / "*"))
    check(len(runs) == 1, "one run directory")
    if runs:
        r = run([lens_bin, "check", runs[0]], cwd=tmp)
        check(r.returncode == 0 and "every step is one trace" in r.stdout,
              "lens check passes on its traces")
        r = run([vpy, "-c", "import sys, lens.analysis as la; "
                 "print(len(la.analyze(sys.argv[1]).steps))", runs[0]], cwd=tmp)
        check(r.returncode == 0 and r.stdout.strip() == "3", "lens.analysis reads them: 3 steps")

    dist = tmp / "dist"
    r = run([python, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, root], cwd=root)
    wheels = glob.glob(str(dist / "*.whl"))
    check(r.returncode == 0 and len(wheels) == 1, "python3 -m build --wheel --no-isolation")
    if wheels:
        with zipfile.ZipFile(wheels[0]) as whl:
            names = whl.namelist()
            info = next(n for n in names if n.endswith(".dist-info/METADATA"))
            metadata = whl.read(info).decode()
        for pattern in ("lens/_lens.", "lens/_analysis.", "lens/liblens.so.", "lens/__init__.py",
                        "lens/analysis.py", ".dist-info/RECORD"):
            check(any(pattern in n for n in names), f"the wheel holds {pattern}")
        check('Requires-Dist: torch>=1.13; extra == "torch"' in metadata,
              "the wheel declares torch as an optional dependency")
        other = tmp / "other"
        run([python, "-m", "venv", "--system-site-packages", other], cwd=tmp)
        r = run([other / "bin" / "python", "-m", "pip", "install", "--no-index", wheels[0]], cwd=tmp)
        check(r.returncode == 0, "the wheel installs into another environment")
        r = run([other / "bin" / "python", "-c",
                 "import lens; print(lens.__file__); lens.set_step_figures(False)"], cwd=tmp)
        check(r.returncode == 0 and r.stdout.startswith(str(other)),
              "import lens from the wheel's environment (liblens found beside the extension)")

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
