"""The name of every kind of release: the key of its stage in the plan, the ledger's
breakdown, the journal, `privacy.json` and `budget.split`. Old run folders recorded these
values, so a value never changes."""

LENGTH_RANGE = "length_range_svt"
LABEL_HISTOGRAM = "label_histogram"
LENGTH_HISTOGRAM = "length_histogram"
KEYWORD_HISTOGRAM = "keyword_histogram"
SIMILARITY_THRESHOLD = "similarity_threshold"
VOTING = "voting"
SELECTION = "selection"
TOPIC_HISTOGRAM = "topic_histogram"
TRAINING = "training"
TUTOR = "tutor"
STUDENT_QUERIES = "student_queries"
DECODING = "decoding"
