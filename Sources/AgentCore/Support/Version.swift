/// The project's version: what every executable's `--version` prints and `status` reports.
public enum PackageVersion {
    public static let current = "0.1.0"

    /// `NAME VERSION`, the first line of every executable's `--version`.
    public static func line(_ program: String) -> String { "\(program) \(current)" }
}
