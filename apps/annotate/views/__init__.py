"""The annotate app's pages: the expert queue (`queue`), the judges-vs-experts report (`report`), the
saved meta-evaluation runs (`metaeval`). The runs' JSON is in `apps.annotate.api`."""
