"""The browser dashboard: plain HTML, CSS and one script, shipped in the package."""
