class UserInputError(Exception):
    """Bad input from the user (a file, a flag, a checkpoint): the CLI prints the message and exits 2."""


def last_line(err: Exception) -> str:
    """The line of an exception's message that says what is wrong (validation errors put it last)."""
    return str(err).strip().splitlines()[-1].strip()
