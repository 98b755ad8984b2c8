"""``python -m contextengine``: the same as the ``contextengine`` command."""

from contextengine.cli import main

if __name__ == "__main__":
    main()
