"""python manage.py dataset OUT [--jsonl]: export the public dataset (apps/leaderboard/dataset.py)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from ...dataset import write_folder, write_jsonl


class Command(BaseCommand):
    help = ("Export the public dataset: answers, contexts, automatic evaluations (with evidence CIDs) and "
            "questionnaires of the users who share their prompts, without account names. OUT is a folder the "
            "Hugging Face datasets library loads (data/train.jsonl and a dataset card), or with --jsonl one file.")

    def add_arguments(self, parser):
        parser.add_argument("out", type=Path)
        parser.add_argument("--jsonl", action="store_true", help="write OUT as one JSONL file instead of a folder")

    def handle(self, out: Path, jsonl=False, **_):
        if out.exists() and (jsonl or not out.is_dir() or any(out.iterdir())):  # an empty folder may be reused
            raise CommandError(f"{out} exists: give a new {'file' if jsonl else 'folder'} (nothing was written)")

        def progress(done: int, total: int) -> None:
            self.stdout.write(f"exported {done:,} of {total:,} answers")
            self.stdout.flush()

        count = (write_jsonl if jsonl else write_folder)(out, progress)
        self.stdout.write(f"{count:,} answers written to {out}")
