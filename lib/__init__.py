"""Pure domain logic shared by the apps: no Django imports here."""
