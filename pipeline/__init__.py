"""PySpark data source over stored streams (reads ``store.keys``; never imports ``broker``)."""
