"""Names the controller writes and the fast readers (`describe` from the record) read back: kept
in one leaf module, so that a reader needs neither the shell nor its imports to agree with it."""

DETAIL_FILE = "detail.json"  # state/<recipe>/detail.json: describe's facts, written each pass

# a deployment's status reason during a rename (shell/renames.py): the old name's, the new name's
BEING_REPLACED, REPLACING = "BeingReplaced", "Replacing"
RENAME_REASONS = (BEING_REPLACED, REPLACING)
