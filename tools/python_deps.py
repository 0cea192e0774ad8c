"""python_deps.py - the one-line message of a tools/*.py script whose Python lacks a module it needs
(PyTorch for ddp_torch.py, matplotlib for plot_trace.py), instead of a ModuleNotFoundError traceback.

Debian's packages (python3-torch, python3-matplotlib) install into /usr/bin/python3, while `python3` on PATH is
often another interpreter (pyenv, a venv) that lacks them: the message then says which interpreter has the
module. Usage, before the script imports the module:

    from python_deps import require
    require("torch", "python3-torch", "ddp_torch.py")
"""
import importlib
import os
import subprocess
import sys

DEBIAN_PYTHON = "/usr/bin/python3"


def _imports_in(interpreter, module):
    """True when `interpreter` (with this environment, minus PYTHONPATH / PYTHONHOME) can import `module`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        return subprocess.run([interpreter, "-c", "import " + module], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=300).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def missing_module_message(module, debian_package, program, error):
    """The line to print when `module` failed to import here with `error`."""
    here = sys.executable or "python3"
    why = " ".join(str(error).split())
    if os.path.exists(DEBIAN_PYTHON) and _imports_in(DEBIAN_PYTHON, module):
        if os.path.realpath(DEBIAN_PYTHON) == os.path.realpath(here):
            return (f"{program}: {module} is installed for {DEBIAN_PYTHON} but does not import here ({why}); "
                    f"check PYTHONPATH and PYTHONHOME")
        return (f"{program} needs the Python module {module}, which {here} cannot import; {DEBIAN_PYTHON} has "
                f"it: run {DEBIAN_PYTHON} {sys.argv[0]} ...")
    return (f"{program} needs the Python module {module}, which {here} cannot import ({why}): apt-get install "
            f"{debian_package} and run it with {DEBIAN_PYTHON}, or pip install {module} into {here}")


def require(module, debian_package, program):
    """Imports `module` (so the caller's own import then succeeds), or exits with the one-line message."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        sys.exit(missing_module_message(module, debian_package, program, e))
