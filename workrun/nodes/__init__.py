"""One executor per node kind (STYLE.md: nodes/)."""
