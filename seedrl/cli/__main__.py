"""``python -m seedrl.cli``."""

from seedrl.cli import main

main()
