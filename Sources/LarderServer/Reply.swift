import LarderWire

/// A reply ready to be framed: what a request handler produces.
package struct Reply: Sendable {
    package var opcode: Opcode
    package var requestID: UInt32
    package var status: Status
    package var json: [UInt8]
    package var binary: [UInt8]

    package init(opcode: Opcode, requestID: UInt32, status: Status = .ok, json: [UInt8], binary: [UInt8] = []) {
        self.opcode = opcode
        self.requestID = requestID
        self.status = status
        self.json = json
        self.binary = binary
    }

    /// An error reply: the status in the header and the error object as the JSON part.
    package init(opcode: Opcode, requestID: UInt32, error: LarderError) {
        self.init(opcode: opcode, requestID: requestID, status: error.status, json: error.json.bytes)
    }
}
