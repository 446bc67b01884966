#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmchain_site.settings")
    import django
    from django.core.management import execute_from_command_line

    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        django.setup()
        from llmchain_site.firstrun import migrate_local_database

        migrate_local_database(sys.argv)  # a fresh checkout's local database, before the project's commands
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
