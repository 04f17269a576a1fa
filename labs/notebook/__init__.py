"""A run in a notebook cell: launch or follow it, watch it live, stop it, read its grade.

dashboard   a live run in a cell: every rank's output, loss/tokens/s/memory plots, a Stop button
live_view   what the dashboard shows and how (lines, records, memory, widgets)
grade_table the checker's --json report as a table
hints       the hint tiers of `checker hint` behind a button
"""
