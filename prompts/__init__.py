"""Prompt templates (Jinja2 files) and token-budgeted prompt assembly."""
