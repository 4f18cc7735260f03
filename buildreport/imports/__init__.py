"""Imports: JSON Lines files read, validated and written through the store's one write path."""
