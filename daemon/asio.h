// The one place CLIO includes Boost.Asio. Boost 1.74's awaitable.hpp uses std::exchange
// without including <utility> (see NOTES-debian12.md). Include only from .cc files.
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace asio = boost::asio;
