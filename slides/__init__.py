"""Slide decks, one per lab: slides/labN.md, built to self-contained HTML by slides/build.py (make slides)."""
