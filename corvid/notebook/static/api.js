// The editor's calls to its server: JSON in and out, the token in a header on every call (the
// server refuses a state-changing request without it, so no other page can make one).

const token = document.querySelector('meta[name="corvid-token"]').content;

export class ApiError extends Error {
  constructor(message, status, data) {
    super(message);
    this.status = status;
    this.data = data;
  }
}

export async function call(path, body) {
  const init = {headers: {"X-Corvid-Token": token}, cache: "no-store"};
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError("the editor's server does not answer (was it stopped?)", 0, {});
  }
  let data;
  try {
    data = await response.json();
  } catch (e) {
    data = {error: `${response.status} ${response.statusText}`};
  }
  if (!response.ok) throw new ApiError(data.error || response.statusText, response.status, data);
  return data;
}
