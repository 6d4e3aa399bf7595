"""Task 1 and Task 2 of the paper: arithmetic questions generated from templates, their answer
vocabulary and ranges, the per-operation and decomposer data, and their runs.

    vocabulary expression phrasing operations chains task1 task2 decomposer_data   the generators
    tasks generate records groups                                                   TASKS, splits, JSONL
    space metrics report run cli                                                    the Task run, end to end
"""
