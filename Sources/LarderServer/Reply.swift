import LarderWire

/// A reply ready to be framed: what a request handler produces.
package struct Reply: Sendable {
    package var opcode: Opcode
    package var requestID: UInt32
    package var status: Status
    package var json: [UInt8]
    package var binary: [UInt8]
    /// The binary part as a range of an open file, sent with sendfile (then `binary` is empty): a blob's range on a
    /// plain TCP or Unix-socket connection. Never on a TLS connection (its `tls` is fixed when it is accepted, and it
    /// asks the router for bytes), since TLS encrypts in this process.
    package var file: (any FileRegion)?
    /// The binary part's length, wherever it is.
    package var binaryCount: Int { file?.count ?? binary.count }

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
