"""The build backend of the Python package (PEP 517), used by `pip install .`
and `python3 -m build --wheel` from the repository's root.

It configures the project with CMake (the core, the analysis and the two
extensions only: no tests, benchmarks, examples, MPI or libtorch), builds
the extension targets and packs one wheel: the package `lens` (its Python
modules, `_lens` and `_analysis`, and liblens beside them, found through
the extensions' RUNPATH $ORIGIN). It needs CMake, a C++20 compiler and the
libraries scripts/bootstrap installs; nothing is fetched.

LENS_WHEEL_BUILD_DIR names the CMake build directory (default
build-wheel/ in the repository), kept between builds so that a rebuild is
incremental; LENS_WHEEL_JOBS the parallel jobs (default: the CPUs).
"""

import base64
import csv
import hashlib
import io
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _project():
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(lens\s+VERSION\s+([0-9][0-9.]*)", text)
    if not m:
        raise RuntimeError("lens_build: no project(lens VERSION ...) in CMakeLists.txt")
    project["version"] = m.group(1)
    return project


def _dist_name(project):
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return f"{impl}-{impl}-{platform}"


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    if project.get("keywords"):
        lines.append("Keywords: " + ",".join(project["keywords"]))
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    readme = project.get("readme")
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + (ROOT / readme).read_text()
    return "\n".join(lines) + "\n"


def _entry_points(project):
    """entry_points.txt from pyproject's [project.entry-points] (lens.otel's
    TracerProvider for OTEL_PYTHON_TRACER_PROVIDER=lens)."""
    lines = []
    for group, entries in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
        lines.append("")
    return "\n".join(lines)


def _dist_info(project):
    """The package's metadata files, by name."""
    return {"METADATA": _metadata(project).encode(),
            "entry_points.txt": _entry_points(project).encode(),
            "top_level.txt": b"lens\n"}


def write_dist_info(directory):
    """The metadata beside the package in the build tree, so that the
    package imported from there is found as installed (its entry points
    included)."""
    project = _project()
    info = pathlib.Path(directory) / f"{_dist_name(project)}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    for n, data in _dist_info(project).items():
        (info / n).write_bytes(data)


def _cmake_build():
    build = pathlib.Path(os.environ.get("LENS_WHEEL_BUILD_DIR") or ROOT / "build-wheel")
    jobs = os.environ.get("LENS_WHEEL_JOBS") or str(os.cpu_count() or 2)
    configure = [
        "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
        "-DLENS_BUILD_TESTS=OFF", "-DLENS_BUILD_BENCHMARKS=OFF", "-DLENS_BUILD_EXAMPLES=OFF",
        "-DLENS_WITH_MPI=OFF", "-DLENS_WITH_TORCH=OFF", "-DLENS_WITH_PYTHON=ON",
        "-DLENS_PYTHON_WHEEL=ON", f"-DPython3_EXECUTABLE={sys.executable}",
    ]
    try:  # pybind11 installed with pip has its CMake files in the package
        import pybind11
        configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
    except ImportError:
        pass  # Debian's pybind11-dev: found by CMake where it is
    for command in (configure,
                    ["cmake", "--build", str(build), "-j", jobs, "--target", "lens_python",
                     "lens_python_analysis"]):
        print("lens_build:", " ".join(command), file=sys.stderr, flush=True)
        r = subprocess.run(command, stdout=sys.stderr)
        if r.returncode != 0:
            raise RuntimeError(f"lens_build: {command[0]} {command[1]} failed ({r.returncode}); "
                               "scripts/bootstrap installs what the build needs")
    package = build / "python" / "lens"
    if not any(package.glob("_lens*.so")) or not any(package.glob("_analysis*.so")):
        raise RuntimeError(f"lens_build: the extensions were not built in {package} "
                           "(is pybind11 installed? Debian: pybind11-dev python3-dev)")
    return build, package


def _liblens(build):
    """liblens by the name the extensions ask for (its SONAME)."""
    found = sorted(p for p in build.glob("liblens.so.*") if not p.is_symlink())
    if not found:
        raise RuntimeError(f"lens_build: no liblens.so.* in {build}")
    real = found[0]
    out = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return real, (m.group(1) if m else real.name)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    build, package = _cmake_build()
    files = {}
    for path in sorted(package.iterdir()):
        if path.suffix == ".py" or (path.suffix == ".so" and path.name.startswith("_")):
            files[f"lens/{path.name}"] = path.read_bytes()
    # The start-up hook (python/lens-otel.pth) at the wheel's root: pip puts
    # it in site-packages, where the interpreter runs it at start-up.
    hook = package.parent / "lens-otel.pth"
    files[hook.name] = hook.read_bytes()
    real, soname = _liblens(build)
    files[f"lens/{soname}"] = real.read_bytes()

    name, version, tag = _dist_name(project), project["version"], _tag()
    info = f"{name}-{version}.dist-info"
    for n, data in _dist_info(project).items():
        files[f"{info}/{n}"] = data
    files[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: lens_build\n"
                              f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for n, data in files.items():
        writer.writerow(_record_line(n, data))
    writer.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = record.getvalue().encode()

    wheel_name = f"{name}-{version}-{tag}.whl"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w",
                         zipfile.ZIP_DEFLATED) as whl:
        for n, data in files.items():
            entry = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = (0o755 if n.endswith(".so") or ".so." in n else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, data)
    print(f"lens_build: wrote {wheel_name}", file=sys.stderr)
    return wheel_name


if __name__ == "__main__":
    # python3 lens_build.py dist-info DIRECTORY (the build tree's, from CMake)
    if len(sys.argv) != 3 or sys.argv[1] != "dist-info":
        sys.exit("usage: lens_build.py dist-info DIRECTORY")
    write_dist_info(sys.argv[2])
