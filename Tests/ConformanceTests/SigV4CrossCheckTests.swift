import Foundation
@testable import TransferCore
import TestSupport
import XCTest

/// The signer against botocore's (Tests/Servers/sigv4_reference.py) on
/// generated S3 requests: methods, keys with spaces, unicode and reserved
/// characters, multi-value queries, extra headers, session tokens.
final class SigV4CrossCheckTests: XCTestCase {
    func testMatchesBotocoreOnGeneratedRequests() throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Servers/sigv4_reference.py").path
        var generator = SystemRandomNumberGenerator()
        let keys = ["a.bin", "dir/sub/file name.txt", "ünïcödé/ß.dat", "odd+chars=&;,@$!'()*.bin", "~tilde/-_./x"]
        let queries = ["", "uploads=", "uploadId=abc%2Bdef&partNumber=7", "prefix=dir%2F&max-keys=10&delimiter=%2F",
                       "list-type=2&continuation-token=a%3D%3D"]
        let methods = ["GET", "PUT", "POST", "DELETE", "HEAD"]
        for round in 0..<40 {
            let key = keys.randomElement(using: &generator)!
            let query = queries.randomElement(using: &generator)!
            let host = round % 2 == 0 ? "127.0.0.1:9000" : "bucket-\(round).s3.eu-west-1.amazonaws.com"
            let path = round % 2 == 0 ? "/bucket-\(round)/" + AWSEncoding.encode(key, keepSlash: true) : "/" + AWSEncoding.encode(key, keepSlash: true)
            let url = URL(string: "http://\(host)\(path)" + (query.isEmpty ? "" : "?\(query)"))!
            var headers: HTTPHeaders = ["Content-Type": "application/octet-stream"]
            if round % 3 == 0 { headers.add("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg==") }
            if round % 4 == 0 { headers.add("X-Amz-Meta-Owner", "  ops   team ") }
            if round % 5 == 0 { headers.add("Range", "bytes=0-\(round)") }
            let token = round % 6 == 0 ? "session/token+\(round)" : nil
            let payload = round % 2 == 0 ? SigV4Signer.unsignedPayload : SHA256Hasher.hex(of: Data("body \(round)".utf8))
            let timestamp = "2024\(String(format: "%02d", round % 12 + 1))15T\(String(format: "%02d", round % 24))0102Z"
            let signer = SigV4Signer(credentials: AWSCredentials(accessKeyID: "AKID\(round)", secretAccessKey: "secret/\(round)+key",
                                                                 sessionToken: token), region: "eu-west-1")
            let ours = signer.sign(method: methods[round % methods.count], url: url, headers: headers, payloadHash: payload,
                                   date: amzTimestamp(timestamp))

            var input: [String: Any] = [
                "method": methods[round % methods.count], "url": url.absoluteString,
                "headers": headers.fields.map { [$0.name, $0.value] }, "body_sha256": payload,
                "access_key": "AKID\(round)", "secret_key": "secret/\(round)+key", "region": "eu-west-1", "service": "s3",
                "timestamp": timestamp,
            ]
            if let token { input["session_token"] = token }
            let reference = try runReference(script: script, input: input)
            XCTAssertEqual(ours.canonicalRequest, reference["canonical_request"] as? String, "round \(round): \(url)")
            XCTAssertEqual(ours.headers["Authorization"], reference["authorization"] as? String, "round \(round): \(url)")
        }
    }

    private func runReference(script: String, input: [String: Any]) throws -> [String: Any] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script]
        let stdin = Pipe(), stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        try process.run()
        stdin.fileHandleForWriting.write(try JSONSerialization.data(withJSONObject: input))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 0, "botocore reference failed (is botocore installed? scripts/setup installs it)")
        return try JSONSerialization.jsonObject(with: output) as? [String: Any] ?? [:]
    }
}
