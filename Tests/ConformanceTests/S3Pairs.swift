import Foundation
import TestSupport
import TransferCore
import XCTest

/// What the S3 conformance cases share: every (server, backend) pair, and bucket names.
extension XCTestCase {
    /// Every (server, backend) pair: the S3 cases run against moto and SeaweedFS on both backends.
    func s3Pairs() throws -> [(label: String, server: String, configuration: S3Configuration, transport: Transport)] {
        let peers = try UploadServers.current()
        var pairs: [(label: String, server: String, configuration: S3Configuration, transport: Transport)] = []
        for (server, configuration) in peers.s3Servers {
            for (backend, transport) in Backends.all {
                pairs.append(("\(server)/\(backend)", server, configuration, transport))
            }
        }
        return pairs
    }

    /// A bucket name of the case, unique per run (SeaweedFS keeps buckets on disk across cases).
    func bucket(_ stem: String, _ label: String) -> String {
        "\(stem)-\(label.replacingOccurrences(of: "/", with: "-"))-\(UUID().uuidString.prefix(6).lowercased())"
    }
}
