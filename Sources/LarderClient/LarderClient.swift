// LarderClient
