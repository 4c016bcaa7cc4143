class UserInputError(Exception):
    """Bad input from the user (a file, a flag, a checkpoint): the CLI prints the message and exits 2."""
