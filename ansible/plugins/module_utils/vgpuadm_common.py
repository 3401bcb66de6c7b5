# Copyright: vgpuadm developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Shared by the collection's modules: import vgpuadm from the module's interpreter, the common options, and
turning vgpuadm's errors (one-line message + hint) into a module failure."""


import traceback

__all__ = ["COMMON_ARGS", "HAS_VGPUADM", "VgpuadmError", "fail_from", "require_vgpuadm"]

try:
    from vgpuadm.errors import VgpuadmError

    HAS_VGPUADM = True
    IMPORT_ERROR = None
except ImportError:
    VgpuadmError = Exception  # placeholder so `except VgpuadmError` stays valid
    HAS_VGPUADM = False
    IMPORT_ERROR = traceback.format_exc()

COMMON_ARGS = dict(
    root=dict(type="path", default="/"),
    connect=dict(type="str"),
)


def require_vgpuadm(module):
    """Fail with the fix when the module's interpreter cannot import vgpuadm."""
    if not HAS_VGPUADM:
        module.fail_json(
            msg="the vgpuadm Python package is not importable by %s" % module._name,
            hint="set ansible_python_interpreter to the Python vgpuadm is installed in (e.g. its venv's python)",
            exception=IMPORT_ERROR,
        )


def fail_from(module, exc, **extra):
    """A vgpuadm error as a module failure: msg is vgpuadm's message, hint its hint, error its class."""
    module.fail_json(
        msg=exc.message,
        hint=exc.hint,
        error=type(exc).__name__,
        exit_code=getattr(exc, "exit_code", 1),
        **extra
    )
