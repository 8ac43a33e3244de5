import Foundation
import TransferCore

/// Wraps a real transport and fails chosen requests a given number of times
/// before letting them through: a dropped connection, or a synthetic error
/// status with an S3-style XML body. Used where the real peer (moto) cannot
/// fail on request; every other request reaches the real server.
package final class FaultInjectingTransport: Transport, Sendable {
    package enum Fault: Sendable {
        case connectionDropped
        case status(Int, code: String)
        /// Runs the action (a change on the server, say), then lets the request through.
        case before(@Sendable () async throws -> Void)
    }

    package let name: String
    package var capabilities: TransportCapabilities { wrapped.capabilities }
    private let wrapped: Transport
    private let rules: [(matches: @Sendable (TransferRequest) -> Bool, fault: Fault)]
    private let remaining: LockedBox<[Int]>
    /// Requests seen, by the rule that matched them (for assertions).
    package let seen = LockedBox<[Int: Int]>([:])

    package init(wrapping transport: Transport, rules: [(matches: @Sendable (TransferRequest) -> Bool, fault: Fault, times: Int)]) {
        wrapped = transport
        name = transport.name
        self.rules = rules.map { ($0.matches, $0.fault) }
        remaining = LockedBox(rules.map(\.times))
    }

    package func execute(_ request: TransferRequest, sink: ResponseSink) async throws -> TransferOutcome {
        if let index = rules.firstIndex(where: { $0.matches(request) }) {
            seen.withLock { $0[index, default: 0] += 1 }
            let fire = remaining.withLock { counts -> Bool in
                guard counts[index] > 0 else { return false }
                counts[index] -= 1
                return true
            }
            if fire {
                switch rules[index].fault {
                case .connectionDropped:
                    throw TransportError(.reset, url: request.url, message: "connection dropped (injected)")
                case .status(let status, let code):
                    let body = Data("<Error><Code>\(code)</Code><Message>injected</Message></Error>".utf8)
                    let head = ResponseHead(status: status, headers: ["Content-Length": String(body.count)], url: request.url)
                    try sink.receive(head: head)
                    try body.withUnsafeBytes { try sink.receive(body: $0) }
                    return TransferOutcome(head: head, bytesReceived: Int64(body.count), bytesSent: 0)
                case .before(let action):
                    try await action()
                }
            }
        }
        return try await wrapped.execute(request, sink: sink)
    }
}
