"""The token store: a corpus tokenised once (``prepare``, on datatrove's executors), read back through memory maps
(``format``) as the objectives' datasets (``datasets``)."""
