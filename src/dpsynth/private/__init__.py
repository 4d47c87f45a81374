"""The private side: the only package that holds private records or spends budget."""
