/// RFC 7396 JSON merge patch: null removes a member, objects merge recursively, anything else replaces.
public enum MergePatch {
    /// `target` with `patch` merged into it.
    public static func apply(_ patch: JSONObject, to target: JSONObject) -> JSONObject {
        var result = target
        for (key, value) in patch {
            switch value {
            case .null:
                result[key] = nil
            case .object(let inner):
                let base = result[key]?.objectValue ?? [:]
                result[key] = .object(apply(inner, to: base))
            default:
                result[key] = value
            }
        }
        return result
    }
}
