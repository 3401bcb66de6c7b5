"""Files users hand us: plan files, saved domain XML, mdevctl definitions (parsing and rendering)."""
