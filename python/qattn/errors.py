"""Exceptions for qattn_status values, each carrying the library's one-line qattn_last_error()."""

OK, ERROR, BAD_INPUT, NO_GPU = 0, 1, 2, 3   # qattn_status (equal to the CLI exit codes)


class QattnError(RuntimeError):
    """A qattn call failed (QATTN_ERROR: compile, launch or cache failure); base of the others."""

    status = ERROR

    def __init__(self, message, call=None):
        self.message = message
        self.call = call   # the C function that failed, or None for checks made by the wrapper itself
        super().__init__(f"{call}: {message}" if call else message)


class BadInput(QattnError, ValueError):
    """QATTN_BAD_INPUT: the request is malformed or unsupported; the message says what is accepted."""

    status = BAD_INPUT


class NoGpu(QattnError):
    """QATTN_NO_GPU: the operation needs a CUDA driver and device and there is none."""

    status = NO_GPU


_BY_STATUS = {ERROR: QattnError, BAD_INPUT: BadInput, NO_GPU: NoGpu}


def check(lib, status, call):
    """Raises the exception of a failed `status`; must run right after `call`, on the same thread,
    because qattn_last_error() is per thread and overwritten by the next qattn call."""
    if status == OK:
        return
    raw = lib.qattn_last_error()
    message = raw.decode("utf-8", "replace") if raw else ""
    if not message:
        message = f"failed with status {status} and no message"
    cls = _BY_STATUS.get(status)
    if cls is None:
        raise QattnError(f"unknown status {status}: {message}", call)
    raise cls(message, call)
