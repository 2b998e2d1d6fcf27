"""The builtin router (frontend.type: builtin)."""
