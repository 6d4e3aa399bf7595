"""`redkit fit`: RED on someone's labelled text with domains (records, config, data, run, report)."""
