// LarderStore: see StoreProtocols.swift (API) and SQLiteStore.swift (the SQLite implementation).
