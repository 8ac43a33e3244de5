import Foundation

/// The dashboard's files, kept in `Control/Dashboard/` and built into the binary
/// (SwiftPM's `embedInCode`): no CDN, no build step, nothing read from disk at run time.
enum Dashboard {
    static func response(_ asset: DashboardAsset) -> HTTPResponse {
        let (bytes, type): ([UInt8], String)
        switch asset {
        case .page: (bytes, type) = (PackageResources.index_html, "text/html; charset=utf-8")
        case .script: (bytes, type) = (PackageResources.dashboard_js, "text/javascript; charset=utf-8")
        case .style: (bytes, type) = (PackageResources.dashboard_css, "text/css; charset=utf-8")
        }
        return HTTPResponse(status: 200, contentType: type, body: Data(bytes), headers: [
            // Only its own script and style, only its own API; never framed by another page.
            ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'"),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
        ])
    }
}
