// One import gives users the client and the wire vocabulary it speaks (LarderError, Record, SearchQuery, JSON...).
@_exported import LarderWire
