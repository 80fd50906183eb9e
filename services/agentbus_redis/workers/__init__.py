"""The five worker types, one package each; no worker imports another."""
