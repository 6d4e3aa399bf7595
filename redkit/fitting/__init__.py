"""`redkit fit`: RED on someone's labelled text with domains (records, config, data, run, report; add-domain is in redkit/lifecycle).

Named `fitting`, not `fit`: `redkit.fit` is the API function (a subpackage of that name would shadow it)."""
