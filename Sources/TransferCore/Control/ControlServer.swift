import Foundation

/// `transferd run --listen`: the control API served while the run works. Each
/// connection has its own thread, so neither a slow client nor a long event
/// stream holds up the run loop; the run only appends to the journal.
package final class ControlServer: Sendable {
    /// The base URL, with the port actually bound.
    package let url: String
    private let server: HTTPServer
    private let journal: EventJournal

    package init(address: ListenAddress, api: ControlAPI) throws {
        server = try HTTPServer(address: address, bodyLimit: ControlAPI.bodyLimit, preflight: { api.preflight($0) },
                                isTrusted: { api.bearsToken($0) }) {
            api.respond(to: $0)
        }
        url = address.url(port: server.port)
        journal = api.monitor.journal
    }

    /// Ends the event streams (each sends what it holds, the run's summary last,
    /// for up to two seconds: a stream is counted until its connection lets it go)
    /// and closes every connection.
    package func stop() {
        journal.close()
        let deadline = Date().addingTimeInterval(2)
        while journal.streams > 0, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        server.stop()
    }
}
