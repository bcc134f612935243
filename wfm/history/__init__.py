"""History on Spark: the landing log, the Parquet store, historic queries and reports.

The package itself imports nothing: most processes that import one of its modules (an agent,
``wfm deploy``, the monitor asking the historian) need no Spark, so PySpark is loaded only by the
modules that query it (``store``, ``spark``, ``spark_filter``).
"""
