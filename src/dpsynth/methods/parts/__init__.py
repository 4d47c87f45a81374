"""Public post-processing the recipes share: no private read, no charge."""
