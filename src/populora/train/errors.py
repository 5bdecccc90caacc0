"""The trainer's user-facing error: raised for problems a user can fix (bad folder, damaged checkpoint, model
that does not fit); its message is one line naming the problem and the fix, which the CLI prints (exit 2)."""


class TrainError(RuntimeError):
    """A user-fixable problem starting or resuming a run; the message is one line with the fix."""
