"""`python -m streamlearn`: the `streamlearn` command."""

from streamlearn.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
