import LarderServer

// The shipped server: no test hooks (a test-only build, Tests/larder-server-test, gives them).
ServerCommand.run(hooks: ServerHooks())
