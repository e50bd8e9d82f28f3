// LarderServer
