import Foundation
import LarderClient

// An app with a local replica, as a process the tests can kill: `larder-replica-test write PATH PORT COUNT` queues COUNT
// todos (each created, then ticked) in the replica file PATH and drains them to the server at PORT; `drain PATH PORT`
// opens the file again and drains what is left. Each prints "queued" once its writes are in the file and "drained"
// when none waits, then exits 0.

struct Todo: Codable, Sendable {
    var title: String
    var isFinish: Bool
}

let arguments = CommandLine.arguments
guard arguments.count >= 4, let port = Int(arguments[3]) else {
    FileHandle.standardError.write(Data("usage: larder-replica-test write|drain PATH PORT [COUNT]\n".utf8))
    exit(2)
}
let client = LarderClient(host: "127.0.0.1", port: port)
let replica = try LarderReplica(
    path: arguments[2], client: client,
    configuration: LarderReplica.Configuration(retryDelay: .milliseconds(20), maxRetryDelay: .milliseconds(500)))
let todos = replica.collection("todos", of: Todo.self)
if arguments[1] == "write", arguments.count >= 5, let count = Int(arguments[4]) {
    for n in 0..<count {
        let todo = try todos.create(Todo(title: "todo \(n)", isFinish: false))
        try todos.update(todo) { $0.isFinish = true }
    }
}
FileHandle.standardOutput.write(Data("queued \(replica.status.pendingWrites)\n".utf8))
let updates = replica.statusUpdates()
replica.start()
// The status now, then at each change: the first with no write waiting ends the wait.
for await status in updates where status.pendingWrites == 0 { break }
FileHandle.standardOutput.write(Data("drained\n".utf8))
replica.close()
