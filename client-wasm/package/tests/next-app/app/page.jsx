// A server component; the payment is the client component's.
import Pay from "./pay";

export default function Page() {
  return <Pay />;
}
