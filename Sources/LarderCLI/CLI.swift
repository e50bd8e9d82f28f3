// LarderCLI
