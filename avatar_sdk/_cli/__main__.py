"""``python -m avatar_sdk._cli``: the same as the ``avatar-sdk`` console script."""

from .main import main

if __name__ == "__main__":
    main(prog_name="avatar-sdk")
