"""Errors raised by the SDK inside an App process.

    SDKError(RuntimeError)
      NotInAppError        called outside a call started by the runner
      WrongCallKindError   e.g. compensation.context() inside a normal call
"""

__all__ = ["NotInAppError", "SDKError", "WrongCallKindError"]


class SDKError(RuntimeError):
    """Raised when the SDK is used in a way the runner cannot honour."""


class NotInAppError(SDKError):
    """Raised when an SDK function is called outside a process started by Workrun."""

    def __init__(self, function: str) -> None:
        how = ("a compensation runs when a run that called the App finally fails: try it with "
               "`workrun verify WORKFLOW`" if function.startswith("compensation.")
               else "run the App with `workrun app run PROJECT APP`")
        super().__init__(
            f"workrun_sdk.{function}() works only inside an App call started by Workrun "
            f"(WORKRUN_CALL_DIR is not set); {how}"
        )


class WrongCallKindError(SDKError):
    """Raised when a function of one call kind is used in another (e.g. context() in main.py)."""

    def __init__(self, function: str, kind: str) -> None:
        super().__init__(f"workrun_sdk.{function}() is not available in a {kind!r} call")
