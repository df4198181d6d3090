//! What an ACL refusal asks of delayq's Redis user: a refused command,
//! key or channel named as what to add to the user's ACL. README's "Least
//! privilege" section has the whole line.

/// Categories of the commands delayq's scripts run. A refusal inside a
/// script does not say which command it was (Redis 7.0: "The user
/// executing the script can't run this command or subcommand"), so it
/// names all of them.
const SCRIPT_CATEGORIES: &str = "+@hash +@list +@set +@sortedset +@string +@stream +@pubsub";

/// Whether `detail` (an error reply's text after its code) is an ACL
/// refusal of a command a script ran: Redis's unnamed one, or Valkey's
/// ("ACL failure in script: User delayq has no permissions to run the
/// 'hmget' command"), which names it.
pub(crate) fn refused_in_script(detail: &str) -> bool {
    unnamed_in_script(detail) || detail.contains("failure in script")
}

fn unnamed_in_script(detail: &str) -> bool {
    detail.contains("can't run this command or subcommand")
}

/// What to add to the user's ACL for the refusal `detail` (NOPERM's text,
/// or a script's refusal).
pub(crate) fn what_to_add(detail: &str) -> String {
    let lower = detail.to_lowercase();
    if unnamed_in_script(detail) {
        return format!("{SCRIPT_CATEGORIES} (the commands delayq's scripts run)");
    }
    if lower.contains("access a key") || lower.contains("access one of the keys") {
        return "key patterns covering delayq's keys: ~{PREFIX}:* ~{PREFIX:*".to_owned();
    }
    if lower.contains("channel") {
        return "channel patterns &{PREFIX}:* &{PREFIX:* &__keyevent@*__:expired".to_owned();
    }
    // "no permissions to run the 'hset' command" (or 'function|load').
    let command = detail.split('\'').nth(1).unwrap_or("").to_lowercase();
    let category = match command.split('|').next().unwrap_or("") {
        "hset" | "hget" | "hmget" | "hgetall" | "hdel" | "hincrby" | "hstrlen" | "hexists" => {
            "+@hash"
        }
        "lpush" | "rpush" | "rpop" | "lrange" | "llen" | "ltrim" | "lindex" => "+@list",
        "sadd" | "srem" | "sismember" | "smembers" | "scard" => "+@set",
        "get" | "set" | "mget" | "incr" | "incrby" => "+@string",
        "xadd" | "xrange" | "xinfo" | "xlen" => "+@stream",
        "publish" | "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => "+@pubsub",
        c if c.starts_with('z') => "+@sortedset",
        _ => "",
    };
    if !category.is_empty() {
        category.to_owned()
    } else if !command.is_empty() {
        format!("+{command}")
    } else {
        "the commands README's Least privilege line lists".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_what_to_add() {
        let run = |c: &str| format!("this user has no permissions to run the '{c}' command");
        assert_eq!(what_to_add(&run("hset")), "+@hash");
        assert_eq!(what_to_add(&run("zadd")), "+@sortedset");
        assert_eq!(what_to_add(&run("function|load")), "+function|load");
        assert_eq!(what_to_add(&run("wait")), "+wait");
        assert!(what_to_add(
            "this user has no permissions to access one of the keys used as arguments"
        )
        .starts_with("key patterns"));
        assert!(what_to_add(
            "this user has no permissions to access one of the channels used as arguments"
        )
        .starts_with("channel patterns"));
        let script = "The user executing the script can't run this command or subcommand script: f, on @user_function:2.";
        assert!(refused_in_script(script));
        assert!(what_to_add(script).contains("+@hash"));
        let valkey = "failure in script: User delayq has no permissions to run the 'hmget' command script: on @user_function:476.";
        assert!(refused_in_script(valkey));
        assert_eq!(what_to_add(valkey), "+@hash");
    }
}
